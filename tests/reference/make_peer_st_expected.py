#!/usr/bin/env python3
"""Decode the peer's st/ shards independently (Python's struct, not our reader) and
write what tst_safetensors must find: per tensor its shard, absolute offset, byte size,
dtype, shape and either the f32 bit pattern of every widened element or the raw bytes.

    python3 tests/reference/make_peer_st_expected.py tests/fixtures/peer/st \
        tests/fixtures/st/peer-st-expected.json
"""
import json
import struct
import sys
from pathlib import Path


def f32_bits(value):
    return struct.unpack("<I", struct.pack("<f", value))[0]


def main(st_dir, out_path):
    shards = sorted(Path(st_dir).glob("model-*.safetensors"))
    out = {}
    for shard_index, shard in enumerate(shards):
        blob = shard.read_bytes()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        data_start = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            raw = blob[data_start + begin:data_start + end]
            entry = {"shard": shard_index, "offset": data_start + begin, "nbytes": end - begin,
                     "dtype": info["dtype"], "shape": info["shape"]}
            dtype = info["dtype"]
            if dtype == "U8":
                entry["hex"] = raw.hex()
            else:
                if dtype == "F32":
                    values = struct.unpack("<%df" % (len(raw) // 4), raw)
                elif dtype == "F16":
                    values = struct.unpack("<%de" % (len(raw) // 2), raw)  # IEEE half
                elif dtype == "BF16":
                    values = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0]
                              for i in range(0, len(raw), 2)]
                entry["f32_bits"] = [f32_bits(v) for v in values]
            out[name] = entry
    Path(out_path).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
