"""The shared cores every tool-call format is declared on: the streaming loop and emission (base), the
incremental JSON validator (jsonscan), JSON call objects (jsoncalls) alone or in tags (tagged) or lists
(jsonlists), calls between section markers (sectioned), named invokes with text parameters (invokes),
schema-typed text values (textargs), Python call syntax (pythonic), think blocks left to a tool parser
(thinkblock). A format is a class in ../formats/ that says what its markers look like.
"""
