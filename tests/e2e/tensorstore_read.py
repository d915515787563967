"""Reads every array of a checkpoint that Switchyard's workers wrote with tensorstore's
zarr driver, as any zarr reader would (no JAX, no Switchyard), and compares it with
DIR/expected.npz (keyed by Orbax's parameter names).

    python tensorstore_read.py DIR
"""

import os
import sys

import numpy as np
import tensorstore as ts


def main():
    directory = sys.argv[1]
    expected = np.load(os.path.join(directory, "expected.npz"))
    for name in expected.files:
        path = os.path.join(directory, "checkpoint", name)
        array = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": path}}).result()
        got = array.read().result()
        want = expected[name]
        if want.dtype.kind == "V":  # numpy keeps bfloat16 as raw 2-byte records
            assert str(got.dtype) == "bfloat16", (name, got.dtype)
            got, want = got.view(np.uint16), want.view(np.uint16)
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)
    print(f"PASS tensorstore_read {len(expected.files)} arrays", flush=True)


if __name__ == "__main__":
    sys.exit(main())
