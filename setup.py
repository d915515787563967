"""Generates the gRPC stubs from proto/ into the package as the wheel is built (the
repository keeps only the .proto files); everything else is in pyproject.toml."""

import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

PROTOS = ["common", "rm", "worker", "host_callback", "sidecar", "proxy"]


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        from grpc_tools import protoc

        root = pathlib.Path(__file__).resolve().parent
        out = pathlib.Path(self.build_lib)
        include = str(pathlib.Path(protoc.__file__).parent / "_proto")
        args = ["protoc", f"-I{root / 'proto'}", f"-I{include}", f"--python_out={out}",
                f"--pyi_out={out}", f"--grpc_python_out={out}"]
        args += [str(root / "proto" / "switchyard" / f"{name}.proto") for name in PROTOS]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on proto/switchyard/*.proto")


# Inside build/ (ignored), beside the C++ build, not in a build/lib of its own.
setup(cmdclass={"build_py": BuildWithStubs}, options={"build": {"build_base": "build/python"}})
