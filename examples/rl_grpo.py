"""GRPO with Tunix across slices: the trainer (actor and reference model) on slice 0,
the sampler on slice 1, Tunix's own weight sync between them after every step.

A tiny Llama 3 (Tunix's model definition, random weights, no hub) learns a toy verifiable
task: answer a digit prompt with that digit. Tunix runs unmodified; with
`JAX_PLATFORMS=proxy` it takes the Pathways path for weight sync (pathwaysutils'
side-channel reshard), here served by Switchyard. The same run on JAX's own CPU backend
(a child process with as many local devices) gives the reference: rewards and loss must
match step for step.

Needs Tunix (`pip install google-tunix==0.1.7`; `./dev test` makes `.venv-tunix`).

    python examples/rl_grpo.py                 # starts a 2-slice local cluster
    python examples/rl_grpo.py --target grpc://127.0.0.1:29000
"""

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import time

DEVICES_PER_SLICE = 2
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


def run_grpo(steps, trainer_devices, rollout_devices, seed=0):
    """Runs `steps` GRPO steps; returns the per-step rewards and loss."""
    import grain.python as grain
    import jax
    import numpy as np
    import optax
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
            actor_optimizer=optax.adam(3e-3), eval_every_n_steps=1000, max_steps=steps),
        rollout_config=base_rollout.RolloutConfig(
            max_tokens_to_generate=4, max_prompt_length=8, kv_cache_size=32,
            temperature=1.0, seed=jax.random.PRNGKey(seed)),
    )
    cluster = rl_cluster_lib.RLCluster(actor=actor, reference=reference, tokenizer=tokenizer,
                                       cluster_config=cluster_config)
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
    result = {"rewards": [float(r) for r in rewards], "loss": [float(x) for x in loss],
              "steps_per_s": steps / seconds}
    del learner, cluster, actor, reference
    gc.collect()
    return result


def run_local(steps):
    """The same run on JAX's own CPU backend, in a child process (JAX_PLATFORMS differs)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={2 * DEVICES_PER_SLICE}")
    out = subprocess.run([sys.executable, __file__, "--local", "--steps", str(steps)], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", help="proxy address; default: start a local cluster")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--local", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.local:
        import jax
        devices = jax.devices()
        print(json.dumps(run_grpo(args.steps, devices[:DEVICES_PER_SLICE],
                                  devices[DEVICES_PER_SLICE:2 * DEVICES_PER_SLICE])))
        return

    import switchyard
    cluster = (contextlib.nullcontext() if args.target else
               switchyard.LocalCluster(workers=2, devices_per_worker=DEVICES_PER_SLICE))
    with cluster as c:
        os.environ["JAX_PLATFORMS"] = "proxy"  # Tunix picks its weight-sync path by it.
        switchyard.initialize(args.target if c is None else c.target)
        remote = run_grpo(args.steps, switchyard.slice_devices(0), switchyard.slice_devices(1))
    local = run_local(args.steps)
    for step, (reward, loss, local_reward, local_loss) in enumerate(
            zip(remote["rewards"], remote["loss"], local["rewards"], local["loss"])):
        print(f"step {step}: reward sum {reward:.4f} (local {local_reward:.4f})  "
              f"loss {loss:.6f} (local {local_loss:.6f})")
    print(f"steps/s: {remote['steps_per_s']:.3f} through Switchyard, "
          f"{local['steps_per_s']:.3f} on local JAX")
    import numpy as np
    np.testing.assert_allclose(remote["rewards"], local["rewards"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(remote["loss"], local["loss"], rtol=1e-4, atol=1e-5)
    print("rewards and loss match local JAX step for step")


if __name__ == "__main__":
    main()
