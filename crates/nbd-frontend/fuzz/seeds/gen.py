#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets into seeds/<target>/ (run from
anywhere; the files are committed, this documents how they were made)."""
import os, struct
here = os.path.dirname(os.path.abspath(__file__))
IHAVEOPT = 0x49484156454F5054
REQ = 0x25609513

def put(target, name, data):
    d = os.path.join(here, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def opt(o, data=b""):
    return struct.pack(">QII", IHAVEOPT, o, len(data)) + data

def info(name, reqs=()):
    return struct.pack(">I", len(name)) + name + struct.pack(">H", len(reqs)) + b"".join(struct.pack(">H", r) for r in reqs)

def meta(name, queries):
    return struct.pack(">I", len(name)) + name + struct.pack(">I", len(queries)) + b"".join(struct.pack(">I", len(q)) + q for q in queries)

def req(cmd, flags, off, ln, cookie=1):
    return struct.pack(">IHHQQI", REQ, flags, cmd, cookie, off, ln)

# options: raw option data
put("options", "info", info(b"zftl", (1, 3)))
put("options", "info_default", info(b""))
put("options", "meta", meta(b"zftl", [b"base:allocation"]))
put("options", "meta_list", meta(b"", [b"base:", b"qemu:dirty-bitmap:x"]))
put("options", "name", b"zftl")

# request: 28-byte header + 16 knob bytes (see fuzz_targets/request.rs)
knobs = bytes([3]) + struct.pack(">Q", 1024) + bytes([1]) + struct.pack(">I", 8) + bytes([6, 1])
for i, (c, f, o, l) in enumerate([(0, 0, 4096, 8192), (1, 1, 0, 4096), (3, 0, 0, 0), (4, 0, 0, 1 << 20),
                                  (6, 0x12, 4096, 4096), (7, 8, 100, 5000), (2, 0, 0, 0),
                                  (0, 0, 2**64 - 4096, 4096),
                                  # 512-byte sectors of 4 KiB blocks: partial reads, writes, trims and
                                  # zeroing (FAST_ZERO on part of a block is refused), and misaligned.
                                  (0, 0, 512, 1024), (1, 1, 3584, 1024), (4, 0, 1536, 8192),
                                  (6, 0x10, 512, 4096), (6, 4, 4096 * 1023 + 3584, 512), (1, 0, 256, 512)]):
    put("request", "req%d" % i, req(c, f, o, l) + knobs)

# handshake: knob byte + client stream (see fuzz_targets/handshake.rs)
flags = struct.pack(">I", 3)
put("handshake", "list_info_go", bytes([0]) + flags + opt(3) + opt(8) + opt(9, meta(b"zftl", [])) +
    opt(10, meta(b"zftl", [b"base:allocation"])) + opt(6, info(b"ro", (1, 2, 3))) + opt(7, info(b"zftl")) +
    req(0, 0, 0, 4096) + req(7, 0, 0, 65536) + req(3, 0, 0, 0) + req(2, 0, 0, 0))
put("handshake", "export_name", bytes([0]) + struct.pack(">I", 1) + opt(99, b"xx") + opt(5) + opt(1, b"zftl") +
    req(0, 0, 0, 4096) + req(1, 0, 4096, 4096) + b"\x11" * 4096)
put("handshake", "abort", bytes([0]) + flags + opt(2))
put("handshake", "transmission", bytes([4]) + req(1, 1, 0, 8192) + b"\x22" * 8192 + req(0, 4, 0, 16384) +
    req(4, 1, 0, 65536) + req(6, 2, 0, 40960) + req(6, 0x10, 0, 40960) + req(7, 8, 1, 9000) +
    req(1, 0, 2**40, 4096) + b"\x33" * 4096 + req(3, 0, 0, 0) + req(2, 0, 0, 0))
put("handshake", "transmission_512", bytes([5]) + req(1, 0, 512, 2048) + b"\x44" * 2048 + req(7, 0, 0, 131072) +
    req(0, 0, 0, 1024))
# 512-byte requests on a 4 KiB-block export: read-modify-writes of partial blocks.
put("handshake", "transmission_sectors", bytes([4]) + req(1, 0, 512, 1024) + b"\x66" * 1024 +
    req(1, 1, 3584, 5120) + b"\x77" * 5120 + req(0, 0, 512, 8192) + req(4, 0, 1536, 8192) +
    req(6, 0, 3584, 1024) + req(6, 0x10, 512, 512) + req(6, 2, 1024, 512) + req(1, 0, 100, 512) +
    b"\x88" * 512 + req(3, 0, 0, 0) + req(2, 0, 0, 0))
put("handshake", "read_only", bytes([6]) + req(1, 0, 0, 4096) + b"\x55" * 4096 + req(4, 0, 0, 4096) +
    req(0, 0, 0, 16384) + req(99, 0, 0, 0))
