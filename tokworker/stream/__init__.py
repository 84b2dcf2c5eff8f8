"""Generated token ids -> text -> OpenAI deltas, one request at a time.

detokenizer.py turns ids into text (never half a character), stop.py finds stop strings in that text (never
showing part of one), state.py holds a whole request's streaming state and decides when and why it ends.
"""
