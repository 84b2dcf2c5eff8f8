"""The HTTP front door (the top layer): OpenAI's Chat Completions, Completions and Responses APIs and
Anthropic's Messages API over a TokenizerPool and an Engine (tokworker.engines).

    requests.py   the request bodies as msgspec Structs (strict decoding, declared ranges)
    plan.py       each request mapped once: render arguments, StreamParams, chunk format, sampling
    errors.py     ApiError: the HTTP status of the one ErrorCode vocabulary (each format's home writes the body)
    generation.py one generation request: the prompt phase, then waiting on the step loop, the whole body
                  joined from the choices' bodies that the workers wrote (tokworker.wire)
    serving.py    the step loop: engine outputs -> one pool.step -> SSE bytes onto each client's transport
    metrics.py    Prometheus text
    render.py     vLLM's render routes: a request -> the engine's GenerateRequest (ids, sampling)
    derender.py   vLLM's derender routes: an engine's generated ids -> responses and chunks
    server.py     the aiohttp app: routes, small routes, errors, access log (Api.app() is mountable)
    run.py        `tokworker api`
    workers_at.py `tokworker api --workers-at`: the front door on running daemons in place of its own pool
"""
