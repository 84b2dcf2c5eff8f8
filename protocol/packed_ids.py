"""Token ids packed 4 bytes apiece, as a render reply carries a prompt's (Render.packed, protocol 10): the
API process reads them into an array('I') with one copy instead of a list of ints, and a message that sends
them on (a stream's replay, a decode) writes the array as the list its field takes.
"""

from __future__ import annotations

import sys
from array import array

PACKED_TYPE = next((code for code in "IL" if array(code).itemsize == 4), None)
PACKS_IDS = PACKED_TYPE is not None and sys.byteorder == "little"     # hosts whose workers pack


def unpacked_ids(ids: list[int] | bytes) -> list[int] | array:
    """A render reply's ids as sent: a list as it is, packed bytes as an array('I') (one copy, no int built).

    >>> unpacked_ids(bytes([1, 0, 0, 0, 0, 1, 0, 0])).tolist(), unpacked_ids([7])
    ([1, 256], [7])
    """
    if type(ids) is not bytes:
        return ids
    unpacked = array(PACKED_TYPE)
    unpacked.frombytes(ids)
    if sys.byteorder != "little":
        unpacked.byteswap()
    return unpacked


def packed_ids(ids: list[int]) -> memoryview:
    """Ids (each below 2**32) as a render reply packs them: a memoryview of an array('I'), whose msgpack is
    its bytes (4 an id, little-endian on the hosts that pack, PACKS_IDS) and which reads as a sequence of ints.

    >>> view = packed_ids([1, 256]); (len(view), view[1], bytes(view))
    (2, 256, b'\\x01\\x00\\x00\\x00\\x00\\x01\\x00\\x00')
    """
    return memoryview(array(PACKED_TYPE, ids))


def ids_as_list(value):
    """Prompt ids held as an array('I') (a packed render's, in the API process) go out as a list (a stream's
    replay on another worker, a decode): what a message's `list[int]` field takes."""
    if type(value) is array:
        return value.tolist()
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")
