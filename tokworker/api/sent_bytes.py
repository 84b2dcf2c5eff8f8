"""How many bytes every holder of a TCP socket has written into it so far, from the kernel's own counts: what
the peer acknowledged (TCP_INFO's tcpi_bytes_acked) plus what waits in the send queue (SIOCOUTQ). A direct
stream's socket is written by its worker; when that worker dies, the API process reads this to know whether
any of the response reached the socket, and whether all of its head did.

>>> import socket
>>> with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
...     accepted = server.accept()[0]                 # an API process's side of a client's connection
...     before = sent_bytes(accepted.fileno())
...     accepted.sendall(b"x" * 1000)
...     queued_or_acked = sent_bytes(accepted.fileno())
...     read = client.recv(10)
...     print(before, queued_or_acked, sent_bytes(accepted.fileno()))
...     accepted.close()
0 1000 1000
>>> left, right = socket.socketpair()
>>> sent_bytes(left.fileno()) is None                # a Unix socket: the kernel keeps no such count
True
>>> left.close(); right.close()
"""

from __future__ import annotations

import fcntl
import socket
import struct
import termios

_INFO_BYTES = 136                    # struct tcp_info up to tcpi_bytes_acked's end (Linux 4.1 on)
_BYTES_ACKED = struct.Struct("=Q")   # a u64 at offset 120: 8 one-byte fields, 24 u32s, then two u64 rates
_ACKED_AT = 120
_COUNT = struct.Struct("=i")


def sent_bytes(fd: int) -> int | None:
    """Bytes written into the TCP socket `fd` since it opened, acknowledged or still queued (a socket that
    connected counts its SYN too: compare two readings); None when the kernel does not say (not a TCP
    socket, or a kernel without the count)."""
    sock = socket.socket(fileno=fd)
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _INFO_BYTES)
        queued = fcntl.ioctl(fd, termios.TIOCOUTQ, bytes(_COUNT.size))
    except OSError:
        return None
    finally:
        sock.detach()
    if len(info) < _INFO_BYTES:
        return None
    return _BYTES_ACKED.unpack_from(info, _ACKED_AT)[0] + _COUNT.unpack(queued)[0]
