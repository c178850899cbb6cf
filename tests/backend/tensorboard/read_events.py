#!/usr/bin/python3
"""An independent reader of TensorBoard event files: TFRecord framing as the TFRecord spec writes it
(uint64 length, uint32 masked CRC-32C of the length, data, uint32 masked CRC-32C of the data), CRC-32C
from python3-crcmod, Event/Summary decoded by python3-protobuf from protoc-compiled event.proto and
summary.proto. Prints one JSON object: {"file_version": ..., "scalars": [[tag, step, value], ...]}.
Exit 77 when protoc or a module is missing.
    read_events.py EVENT_FILE PROTO_DIR SCRATCH_DIR
"""
import json
import os
import struct
import subprocess
import sys

event_file, proto_dir, scratch = sys.argv[1:4]
try:
    import crcmod.predefined
    import google.protobuf  # noqa: F401
    subprocess.run(["protoc", f"-I{proto_dir}", f"--python_out={scratch}", "event.proto", "summary.proto"],
                   cwd=proto_dir, check=True)
except (ImportError, FileNotFoundError, subprocess.CalledProcessError) as e:
    print(f"skip: {e}", file=sys.stderr)
    sys.exit(77)
sys.path.insert(0, scratch)
import event_pb2  # noqa: E402

crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


out = {"file_version": None, "scalars": []}
with open(event_file, "rb") as f:
    blob = f.read()
pos = 0
while pos < len(blob):
    header = blob[pos:pos + 8]
    (length,) = struct.unpack("<Q", header)
    (header_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
    assert header_crc == masked(header), f"bad length CRC at byte {pos}"
    data = blob[pos + 12:pos + 12 + length]
    assert len(data) == length, f"truncated record at byte {pos}"
    (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
    assert data_crc == masked(data), f"bad data CRC at byte {pos}"
    pos += 16 + length
    e = event_pb2.Event()
    e.ParseFromString(data)
    assert e.wall_time > 1.5e9, e.wall_time
    if e.HasField("file_version"):
        out["file_version"] = e.file_version
    for v in e.summary.value:
        assert v.HasField("simple_value"), v
        out["scalars"].append([v.tag, e.step, v.simple_value])
print(json.dumps(out))
