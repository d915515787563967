"""Seeds every fuzz target's corpus with real client traffic.

Starts a local cluster whose processes record what they decode
(SWITCHYARD_RECORD_WIRE), runs the stock JAX client's end-to-end checks and the MLP
example through it, and writes what was recorded into tests/fuzz/corpus/<target>/ in
each target's input format (tests/fuzz/README.md). Run it again when the protocol or
the client changes, then keep only what adds coverage (what CI replays stays short):

    .venv/bin/python tests/fuzz/make_corpus.py
    build-asan/tests/fuzz/<target> -merge=1 <new dir> tests/fuzz/corpus/<target>
"""

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
# Per target: the recorded kinds it takes, each with how to wrap a sample.
FILLER = b"\x01" * 64


def plain(data: bytes) -> bytes:
    return data


def selector(byte: int):
    return lambda data: bytes([byte]) + data


def host_buffer(data: bytes) -> bytes:  # [length][metadata][length][a store message]
    message = b"\x0a" + bytes([len(FILLER)]) + FILLER  # GrpcHostBufferStoreRequest.data
    return bytes([len(data)]) + data + bytes([len(message)]) + message


def put_header(data: bytes) -> bytes:  # selector 2, [length][header][bytes]
    return b"\x02" + bytes([len(data)]) + data + FILLER


TARGETS = {
    "fuzz_ifrt_request": {"ifrt_request": plain},
    "fuzz_sharding": {"sharding": plain},
    "fuzz_host_buffer": {"host_buffer_metadata": host_buffer},
    "fuzz_worker": {"worker_dispatch": selector(0), "worker_compile": selector(1),
                    "worker_put_header": put_header},
    "fuzz_rm": {"rm_register": selector(0), "rm_heartbeat": selector(1), "rm_kv_put": selector(2),
                "rm_state": selector(3), "rm_kv_get": selector(4),
                "rm_report_proxy": selector(6)},
}
# Keeps the repository small: the smallest samples first, up to this many bytes a target.
BYTES_PER_TARGET = 3 << 20


def record(directory: pathlib.Path) -> None:
    sys.path.insert(0, str(ROOT / "python"))
    os.environ["SWITCHYARD_RECORD_WIRE"] = str(directory)
    import switchyard  # noqa: E402  (after the environment its children inherit)

    with switchyard.LocalCluster(workers=2, devices_per_worker=4) as cluster:
        env = {**os.environ, "JAX_BACKEND_TARGET": cluster.target,
               "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"}
        env.pop("SWITCHYARD_RECORD_WIRE")
        subprocess.run([sys.executable, str(ROOT / "tests" / "e2e" / "proxy_client.py"),
                        "--init", "pathwaysutils"], env=env, check=True, timeout=900)
        subprocess.run([sys.executable, str(ROOT / "examples" / "train_mlp.py"), "--steps", "5",
                        "--target", cluster.target], env=env, check=False, timeout=600)


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        recorded = pathlib.Path(scratch)
        record(recorded)
        for target, kinds in TARGETS.items():
            samples = []
            for kind, wrap in kinds.items():
                if not (recorded / kind).exists():
                    continue
                for path in sorted((recorded / kind).glob("*")):
                    samples.append(wrap(path.read_bytes()))
            samples.sort(key=len)
            out = CORPUS / target
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            total = 0
            for sample in samples:
                if total + len(sample) > BYTES_PER_TARGET:
                    break
                (out / hashlib.sha1(sample).hexdigest()).write_bytes(sample)
                total += len(sample)
            print(f"{target}: {len(list(out.iterdir()))} of {len(samples)} samples, {total} bytes")


if __name__ == "__main__":
    main()
