"""What each reasoning format is, by vLLM's parser names: a table, read by one state machine (machine.py).

A format is the tags around the reasoning and a few facts: tags that end the reasoning implicitly and stay
in the content (a tool-call section), an answer wrapper whose tags are dropped (Hunyuan's <answer>, ERNIE's
<response>, Command's <|START_RESPONSE|>), a label the model writes first inside the block (Gemma 4's
"thought"), where generation starts when the prompt does not say, and whether opening a tool call ends a
block the model never closed (`tool_calls_end`: each declaration below says why for its format).
"""

from __future__ import annotations

from dataclasses import dataclass

# Where the output starts: inside the reasoning (an opening tag may still be repeated), in content that
# may open a reasoning block, or in content that never will.
INSIDE, EXPECT, CONTENT = "inside", "expect", "content"
_WHITESPACE = " \t\r\n"


@dataclass(frozen=True)
class ReasoningFormat:
    starts: tuple[str, ...]
    ends: tuple[str, ...]
    implicit_ends: tuple[str, ...] = ()  # end the reasoning and begin the content (kept in it)
    without_prompt: str = INSIDE  # the start when no prompt is known (vLLM's assumption)
    open_prompt: str = EXPECT  # the start when the prompt neither opened nor closed a block
    # Content wrapped in an answer block: its tags are dropped and whitespace at its edges is formatting.
    answer_starts: tuple[str, ...] = ()
    answer_ends: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()  # written first inside the block, not reasoning (Gemma 4's "thought\n")
    # The model may open a tool call inside a block it never closes (Qwen3 and Qwen3.5 do): with a tool
    # parser, the parser's call openings end the reasoning implicitly too, and the call is read as a call.
    # Those openings are control tokens of the model's vocabulary that it writes to act, never to muse, so
    # a format whose tags are control tokens too allows it; False keeps a call written inside the block as
    # reasoning (the README says which formats do).
    tool_calls_end: bool = True
    # Tag text that is markup, never text: dropped wherever it would reach the content (a stray end tag,
    # an end tag after a tool call ended the block). Granite's tags are plain sentences, so they are not.
    markup: bool = True
    append_think: str = ""  # minimax_m2_append_think: no split; content begins with this opening tag

    def __post_init__(self):
        if any(tag[0] in _WHITESPACE for tag in self.ends + self.implicit_ends):
            # whitespace before an end tag is held as formatting
            raise ValueError("a tag ending the reasoning must not begin with whitespace")
        tags = self.starts + self.ends + self.implicit_ends + self.answer_starts + self.answer_ends
        if any(a != b and b.startswith(a) for a in tags for b in tags):
            # a tag that begins another would be taken early by a stream and whole by a parse
            raise ValueError("no tag may be the beginning of another")

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """The tags this parser consumes. Implicit ends stay in the content, so they are kept only when
        the tool parser reading that content asks for them too."""
        return self.starts + self.ends + self.answer_starts + self.answer_ends

    @property
    def strays(self) -> tuple[str, ...]:
        """Tags dropped when they appear in the content: markup that is no answer's text."""
        return (self.ends + self.answer_ends) if self.markup else self.answer_ends


_THINK = ("<think>",), ("</think>",)

# tool_calls_end, format by format: the implicit end is on (the default) where the models are seen writing
# calls inside an unclosed block, and where a call's opening is a control token the model writes only to
# act; it is off only where nothing in the output marks thinking from acting (see each format).
FORMATS = {
    # Qwen3 up to 2507 writes <think> itself; later templates open it in the prompt; enable_thinking=False
    # closes it there. vLLM treats output as reasoning until </think> when it cannot see the prompt.
    # Calls in an unclosed block: Qwen3-32B writes its hermes <tool_call> there and ends the turn without
    # </think> (QwenLM/Qwen3#1459), Qwen3.5/3.6 their XML <tool_call><function=...> (vLLM #39056); vLLM's
    # qwen3 parser ends the reasoning at <tool_call>, as its Kimi K2 parser does at the call section. No
    # output seen drafts a whole call and closes the block after it, so the <tool_call> token is the act.
    "qwen3": ReasoningFormat(*_THINK),
    # R1 always reasons; its template opens the block, older ones let the model write <think>. Its (and
    # V3's, GLM's, MiniMax's, Seed's, Nemotron's, ...) call openings are control tokens: the default.
    "deepseek_r1": ReasoningFormat(*_THINK, open_prompt=INSIDE),
    # V3.1's template writes <think> (thinking=True) or </think> after <｜Assistant｜>; thinking is off by default.
    "deepseek_v3": ReasoningFormat(*_THINK, without_prompt=EXPECT),
    # V4 is V3's switch, and may begin its DSML tool calls straight from the reasoning (vLLM's V4 parser).
    "deepseek_v4": ReasoningFormat(*_THINK, without_prompt=EXPECT, implicit_ends=("<｜DSML｜tool_calls>",)),
    "glm45": ReasoningFormat(*_THINK, without_prompt=EXPECT),
    "minimax_m2": ReasoningFormat(*_THINK, open_prompt=INSIDE),
    # vLLM's variant for clients that read the think block inline: all content, the prompt's <think> put back.
    # Nothing is split, so there is no block to end: the tool parser reads a call wherever it is.
    "minimax_m2_append_think": ReasoningFormat(*_THINK, open_prompt=INSIDE, append_think="<think>",
                                               tool_calls_end=False),
    # Kimi K2 Thinking opens its call section from inside the block (vLLM's kimi_k2 and K2.5 parsers end
    # the reasoning there): an implicit end even without a tool parser, which then reads the call.
    "kimi_k2": ReasoningFormat(*_THINK, implicit_ends=("<|tool_calls_section_begin|>",)),
    "seed_oss": ReasoningFormat(("<seed:think>",), ("</seed:think>",)),
    # Ministral 3 Reasoning / Magistral: [THINK] and [/THINK] are control tokens; a model that was not
    # asked to reason writes neither.
    "mistral": ReasoningFormat(("[THINK]",), ("[/THINK]",), without_prompt=EXPECT),
    # Granite 3.2 writes plain sentences around its thoughts; Granite 3.3 <think>...</think> and then
    # <response>...</response>. A <|tool_call|> written inside the thoughts stays reasoning, deliberately:
    # Granite's prompt puts calls in the response, no Granite output shows one in its thoughts, and 3.2's
    # thoughts are prose between plain sentences with no control token to say where thinking stops (vLLM's
    # granite parser keeps such a call in the reasoning too).
    "granite": ReasoningFormat(("Here is my thought process:", "Here's my thought process:", "<think>"),
                               ("Here is my response:", "Here's my response:", "</think>"), without_prompt=EXPECT,
                               answer_starts=("<response>",), answer_ends=("</response>",), markup=False,
                               tool_calls_end=False),
    # Nemotron 3 Nano: R1's shape; enable_thinking=False closes the block in the prompt.
    "nemotron_v3": ReasoningFormat(*_THINK, open_prompt=INSIDE),
    # OLMo 3 Think: plain-text tags; its template opens <think> in the generation prompt.
    "olmo3": ReasoningFormat(*_THINK),
    # ERNIE 4.5 Thinking: "...\n</think>\n\n<response>\nanswer\n</response>\n", or the answer bare.
    "ernie45": ReasoningFormat(*_THINK, answer_starts=("<response>",), answer_ends=("</response>",)),
    # Hunyuan A13B: "<think>\n...\n</think>\n<answer>\n...\n</answer>"; without thinking, the answer alone.
    "hunyuan_a13b": ReasoningFormat(*_THINK, without_prompt=EXPECT, answer_starts=("<answer>",),
                                    answer_ends=("</answer>",)),
    # Step 3: everything before </think> is reasoning.
    "step3": ReasoningFormat(*_THINK, open_prompt=INSIDE),
    # Gemma 4: <|channel>thought\n ... <channel|>, only when the system prompt asks it to think.
    "gemma4": ReasoningFormat(("<|channel>",), ("<channel|>",), without_prompt=EXPECT, labels=("thought\n",)),
    # Command R7B / Command A: the plan in <|START_THINKING|>, the answer in <|START_RESPONSE|>, calls in
    # <|START_ACTION|> (which the cohere_command2 tool parser reads).
    "cohere": ReasoningFormat(("<|START_THINKING|>",), ("<|END_THINKING|>",), without_prompt=EXPECT,
                              answer_starts=("<|START_RESPONSE|>",), answer_ends=("<|END_RESPONSE|>",)),
    # Holo2: DeepSeek V3's switch with thinking on by default.
    "holo2": ReasoningFormat(*_THINK),
    # Apertus: <|inner_prefix|> ... <|inner_suffix|>, when enable_thinking asks for it.
    "apertus": ReasoningFormat(("<|inner_prefix|>",), ("<|inner_suffix|>",), without_prompt=EXPECT),
    # Apriel 1.5 Thinker reasons from the first token (its system prompt asks it to) and answers in
    # "[BEGIN FINAL RESPONSE] ... [END FINAL RESPONSE]".
    "apriel": ReasoningFormat(("Here are my reasoning steps:",), ("[BEGIN FINAL RESPONSE]",), open_prompt=INSIDE,
                              answer_ends=("[END FINAL RESPONSE]",)),
}
# vLLM's other names for the same formats.
ALIASES = {"mimo": "qwen3", "cohere_command3": "cohere", "cohere_command4": "cohere",
           "hy_v3": "deepseek_v3",  # Hunyuan v3: <think> only when reasoning_effort asks for it
           "step3p5": "step3",  # Step-3.5: its template opens the block; everything before </think> is reasoning
           "poolside_v1": "deepseek_v3"}  # Laguna: V3's switch; its turns begin with <assistant> (prompt.py)
