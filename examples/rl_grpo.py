"""GRPO with Tunix across slices: the trainer (actor and reference model) on slice 0,
the sampler on slice 1, Tunix's own weight sync between them after every step.

A tiny Llama 3 (Tunix's model definition, random weights, no hub) learns a toy verifiable
task: answer a digit prompt with that digit. Tunix runs unmodified; with
`JAX_PLATFORMS=proxy` it takes the Pathways path for weight sync (pathwaysutils'
side-channel reshard), here served by Switchyard. The same run on JAX's own CPU backend
(a child process with as many local devices) gives the reference: rewards and loss must
match step for step.

Needs Tunix (`pip install google-tunix==0.1.7`; `./dev test` makes `.venv-tunix`).

With `--resume` Tunix checkpoints every step; a slice lost mid-run (DATA_LOSS) is
waited for and the run resumed from its last checkpoint, compared with the same resume
on local JAX. (Tunix's resume does not retrace an unbroken run exactly: after a restore
the first step's samples differ, on local JAX as here.)

    python examples/rl_grpo.py                 # starts a 2-slice local cluster
    python examples/rl_grpo.py --target grpc://127.0.0.1:29000
    python examples/rl_grpo.py --steps 8 --resume
"""

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

DEVICES_PER_SLICE = 2
RESUMES_MAX = 3
DIGITS = "0123456789"


class CharTokenizer:
    """One token per character; Tunix takes any object with these five methods."""

    SPECIALS = ("<pad>", "<bos>", "<eos>")
    CHARS = DIGITS + " =?"

    def __init__(self):
        self.vocab_size = len(self.SPECIALS) + len(self.CHARS)

    def pad_id(self):
        return 0

    def bos_id(self):
        return 1

    def eos_id(self):
        return 2

    def encode(self, text, **kwargs):
        return [len(self.SPECIALS) + self.CHARS.index(c) for c in text]

    def decode(self, ids, **kwargs):
        n = len(self.SPECIALS)
        return "".join(self.CHARS[int(i) - n] for i in ids if int(i) >= n)


def digit_reward(prompts, completions, answer, **kwargs):
    """1 when the completion starts with the answer's digit, 0.1 for any digit, else 0."""
    rewards = []
    for completion, want in zip(completions, answer):
        text = completion.strip()
        rewards.append(1.0 if text[:1] == want else 0.1 if text[:1] in DIGITS else 0.0)
    return rewards


def run_grpo(steps, trainer_devices, rollout_devices, seed=0, checkpoint_dir=None):
    """Runs GRPO up to step `steps` (from the last checkpoint in `checkpoint_dir`, if
    any: Tunix restores it); returns the rewards and loss of the steps it ran and a
    digest of the trained parameters."""
    import grain.python as grain
    import jax
    import numpy as np
    import optax
    import orbax.checkpoint as ocp
    from flax import nnx
    from tunix.models.llama3 import model as llama3
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    tokenizer = CharTokenizer()
    config = llama3.ModelConfig(num_layers=2, vocab_size=tokenizer.vocab_size, embed_dim=32,
                                hidden_dim=64, num_heads=2, head_dim=16, num_kv_heads=2,
                                rope_theta=10_000, norm_eps=1e-5)
    axes = ("fsdp", "tp")
    trainer_mesh = jax.sharding.Mesh(np.array(trainer_devices).reshape(-1, 1), axes)
    rollout_mesh = jax.sharding.Mesh(np.array(rollout_devices).reshape(-1, 1), axes)

    def make_model():
        # Initialised in one program straight into the trainer's sharding (no host copy).
        def build():
            return llama3.Llama3(config, rngs=nnx.Rngs(seed))
        graph, abstract = nnx.split(nnx.eval_shape(build))
        shardings = nnx.get_named_sharding(abstract, trainer_mesh)
        state = jax.jit(lambda: nnx.state(build()), out_shardings=shardings)()
        return nnx.merge(graph, state)

    actor, reference = make_model(), make_model()
    cluster_config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={rl_cluster_lib.Role.ACTOR: trainer_mesh,
                      rl_cluster_lib.Role.REFERENCE: trainer_mesh,
                      rl_cluster_lib.Role.ROLLOUT: rollout_mesh},
        rollout_engine="vanilla",
        offload_to_cpu=False,
        training_config=rl_cluster_lib.RLTrainingConfig(
            actor_optimizer=optax.adam(3e-3), eval_every_n_steps=1000, max_steps=steps,
            checkpoint_root_directory=checkpoint_dir,
            checkpointing_options=ocp.CheckpointManagerOptions(save_interval_steps=1,
                                                               max_to_keep=2)),
        rollout_config=base_rollout.RolloutConfig(
            max_tokens_to_generate=4, max_prompt_length=8, kv_cache_size=32,
            temperature=1.0, seed=jax.random.PRNGKey(seed)),
    )
    cluster = rl_cluster_lib.RLCluster(actor=actor, reference=reference, tokenizer=tokenizer,
                                       cluster_config=cluster_config)
    cluster.with_external_metrics_logger(
        lambda buffer: print(f"global step {buffer.global_steps} done", flush=True))
    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster, reward_fns=digit_reward,
        algo_config=grpo_learner.GRPOConfig(num_generations=4, num_iterations=1, beta=0.04))
    rng = np.random.default_rng(seed)
    answers = [str(d) for d in rng.integers(0, 10, size=2 * steps)]
    data = (grain.MapDataset.source([f"{a}=?" for a in answers]).batch(2)
            .map(lambda p: {"prompts": p, "answer": np.array([s[0] for s in p])}))
    start = time.perf_counter()
    learner.train(data, None)
    # The last weight sync is still in flight: wait for it, and let go of every array, so
    # nothing is left on the cluster when the caller stops it.
    jax.block_until_ready(nnx.state(cluster.rollout.model()))
    seconds = time.perf_counter() - start
    rewards = cluster._rl_metrics_logger.get_metric_history("rewards", "sum", "train")
    loss = cluster.actor_trainer.metrics_logger.get_metric_history("actor", "loss", "train")
    trained = nnx.state(cluster.actor_trainer.model, nnx.Param)
    result = {"rewards": [float(r) for r in rewards], "loss": [float(x) for x in loss],
              "steps_per_s": len(rewards) / seconds,
              "params": [float(np.abs(np.asarray(x, np.float64)).sum())
                         for x in jax.tree.leaves(trained)]}
    del trained
    del learner, cluster, actor, reference
    gc.collect()
    return result


def run_local(steps, resumed_at=0):
    """The same run on JAX's own CPU backend, in a child process (JAX_PLATFORMS differs);
    stopped after `resumed_at` steps and resumed from its checkpoint, as the run through
    Switchyard was."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={2 * DEVICES_PER_SLICE}")
    out = subprocess.run([sys.executable, __file__, "--local", "--steps", str(steps),
                          "--local_resumed_at", str(resumed_at)], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def local_main(args):
    import jax
    devices = jax.devices()
    trainer, rollout = devices[:DEVICES_PER_SLICE], devices[DEVICES_PER_SLICE:2 * DEVICES_PER_SLICE]
    if not args.local_resumed_at:
        print(json.dumps(run_grpo(args.steps, trainer, rollout)))
        return
    with tempfile.TemporaryDirectory(prefix="rl_grpo-") as checkpoints:
        run_grpo(args.local_resumed_at, trainer, rollout, checkpoint_dir=checkpoints)
        print(json.dumps(run_grpo(args.steps, trainer, rollout, checkpoint_dir=checkpoints)))


def wait_for(devices, timeout_s=120):
    """Until a value can be put on each of `devices` (a lost slice is back), or raises."""
    import jax
    import numpy as np
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            jax.block_until_ready([jax.device_put(np.zeros(1), d) for d in devices])
            return
        except jax.errors.JaxRuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def run_remote(args, target):
    """Through Switchyard. With --resume, Tunix checkpoints every step, and a lost slice
    (DATA_LOSS) is waited for and the run resumed from its last checkpoint: the trainer's
    state survives, and the steps after it are those an unbroken run takes."""
    import jax

    import switchyard
    os.environ["JAX_PLATFORMS"] = "proxy"  # Tunix picks its weight-sync path by it.
    switchyard.initialize(target)
    trainer, rollout = switchyard.slice_devices(0), switchyard.slice_devices(1)
    with tempfile.TemporaryDirectory(prefix="rl_grpo-") as checkpoints:
        for attempt in range(RESUMES_MAX + 1):
            try:
                return run_grpo(args.steps, trainer, rollout,
                                checkpoint_dir=checkpoints if args.resume else None)
            except jax.errors.JaxRuntimeError as e:
                if not args.resume or "DATA_LOSS" not in str(e) or attempt == RESUMES_MAX:
                    raise
                print(f"lost a slice ({str(e).splitlines()[0]}); resuming from the last "
                      "checkpoint once it is back", flush=True)
            gc.collect()  # the broken run's arrays
            wait_for(trainer + rollout)
    raise AssertionError("unreachable")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", help="proxy address; default: start a local cluster")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--resume", action="store_true",
                        help="checkpoint every step; after a lost slice, resume from there")
    parser.add_argument("--local", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--local_resumed_at", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.local:
        local_main(args)
        return

    import switchyard
    cluster = (contextlib.nullcontext() if args.target else
               switchyard.LocalCluster(workers=2, devices_per_worker=DEVICES_PER_SLICE))
    with cluster as c:
        remote = run_remote(args, args.target if c is None else c.target)
    # A resumed run reports the steps from its checkpoint on; Tunix's resume is compared
    # with the same resume on local JAX.
    first = args.steps - len(remote["rewards"])
    if first:
        print(f"resumed at step {first}")
    local = run_local(args.steps, resumed_at=first)
    for step, (reward, loss, local_reward, local_loss) in enumerate(
            zip(remote["rewards"], remote["loss"], local["rewards"], local["loss"]), start=first):
        print(f"step {step}: reward sum {reward:.4f} (local {local_reward:.4f})  "
              f"loss {loss:.6f} (local {local_loss:.6f})")
    print(f"steps/s: {remote['steps_per_s']:.3f} through Switchyard, "
          f"{local['steps_per_s']:.3f} on local JAX")
    import numpy as np
    np.testing.assert_allclose(remote["rewards"], local["rewards"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(remote["loss"], local["loss"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(remote["params"], local["params"], rtol=1e-5)
    print("rewards and loss match local JAX step for step; so do the trained parameters")


if __name__ == "__main__":
    main()
