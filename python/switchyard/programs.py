"""Turn a JAX function into what a worker compiles: a StableHLO portable artifact
(VHLO bytecode, readable by any plugin at least as new as its target version)
and a serialized CompileOptionsProto."""

from __future__ import annotations

import dataclasses

import jax
from jax._src.lib import xla_client
from jax.extend import mlir as jax_mlir
from jaxlib.mlir.dialects import stablehlo


@dataclasses.dataclass(frozen=True)
class Program:
    code: bytes              # portable artifact, format "mlir"
    compile_options: bytes   # serialized xla.CompileOptionsProto
    target: str              # StableHLO version it was serialized for
    num_outputs: int


def lower_portable(fn, *args, target: str | None = None) -> Program:
    """Lowers `jax.jit(fn)(*args)` for one device.

    `target` is the plugin's `stablehlo_current_version` (a worker reports it);
    the artifact is written for the older of it and this jaxlib's own version.
    """
    lowered = jax.jit(fn).lower(*args)
    module = lowered.compiler_ir("stablehlo")
    if module is None:
        raise ValueError("the function did not lower to StableHLO")
    own = stablehlo.get_current_version()
    version = stablehlo.get_smaller_version(target, own) if target else own
    code = jax_mlir.serialize_portable_artifact(module.operation.get_asm(binary=True), version)
    options = xla_client.CompileOptions()
    num_outputs = len(jax.tree_util.tree_leaves(lowered.out_info))
    return Program(code=code, compile_options=options.SerializeAsString(), target=version,
                   num_outputs=num_outputs)
