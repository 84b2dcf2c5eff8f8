"""The shared cores every tool-call format is declared on: the streaming loop (base), the deltas it sends
(emit), a call's arguments object (jsonargs), the tools list in and the whole message out (shapes), the
incremental JSON validator (jsonscan), JSON call objects (jsoncalls) alone or in tags (tagged) or lists
(jsonlists), calls between section markers (sectioned), named invokes with text parameters (invokes),
schema-typed text values (textargs), Python call syntax (pythonic), think blocks left to a tool parser
(thinkblock). A format is a class in ../formats/ that says what its markers look like.
"""
