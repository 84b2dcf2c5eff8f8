"""Engines behind the front door: the one Engine seam (base.py), an in-process base for engine authors
(inprocess.py) and the replay engine (replay.py). The pool never imports an engine; the server drives both."""
