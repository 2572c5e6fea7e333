"""`plora`: the scheduler's command line.

    plora crossovers [--config default]      Fig. 3a's crossover table (make crossovers)
    plora steps [--steps 5 --adapters 200]   drive the scheduler by hand on a random batch
                                             and print why it chose what it chose
    plora timing-check [--config paper]      the device-timing table against the model
"""
import random

import click

import isa
from isa.config import parse_overrides

from .config import load_scheduler_config


def config_from(loader, name, overrides, what="KNOB"):
    """`loader(name, **KEY=VALUE overrides)`, its errors as click's (one for every CLI)."""
    try:
        changes = parse_overrides(overrides, what)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from None
    try:
        return loader(name, **changes)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None


def _config(name, overrides):
    return config_from(load_scheduler_config, name, overrides)


config_option = click.option("--config", "config_name", default="default", show_default=True,
                             help="scheduler config: a name in scheduler/configs or a JSON path")
set_option = click.option("--set", "overrides", multiple=True, metavar="KNOB=VALUE",
                          help="override a knob of the config (repeatable)")


@click.group()
def main():
    """PLoRA's host-side scheduler over a pool of NDP devices."""


@main.command()
@config_option
@set_option
@click.option("--d", default=4096, show_default=True, help="model dimension of the injected weight")
@click.option("--max-batch", default=256, show_default=True)
def crossovers(config_name, overrides, d, max_batch):
    """Cost of each strategy per GPU-memory state over batch 1..max-batch, and where the best changes."""
    from .crossovers import crossovers as run
    from .device_timing import DeviceTiming
    config = _config(config_name, overrides)
    run(config, DeviceTiming(config.device_config()), d=d, max_batch=max_batch, out=click.echo)


@main.command()
@config_option
@set_option
@click.option("--steps", default=5, show_default=True)
@click.option("--adapters", default=200, show_default=True, help="registered adapters")
@click.option("--batch", default=64, show_default=True, help="requests per step")
@click.option("--skew", default=0.8, show_default=True, help="share of requests to the 50 most popular adapters")
@click.option("--seed", default=0, show_default=True)
def steps(config_name, overrides, steps, adapters, batch, skew, seed):
    """Run the scheduler on a random churning batch and explain every decision."""
    from .scheduler import Request, Scheduler
    config = _config(config_name, overrides)
    rng = random.Random(seed)
    sched = Scheduler(config)
    for a in range(adapters):
        sched.register(a, rng.choice([r for r in (8, 16, 32, 64, 128) if r <= config.max_lora_rank]))
    live, next_rid = [], 0
    for _ in range(steps):
        live = [(rid, a, ctx + 1, False) for rid, a, ctx, _ in live if rng.random() > 0.1]
        while len(live) < batch:
            a = rng.randrange(min(50, adapters)) if rng.random() < skew else rng.randrange(adapters)
            live.append((next_rid, a, rng.randint(64, 2048), True))
            next_rid += 1
        plan = sched.step([Request(rid, a, ctx, new) for rid, a, ctx, new in live])
        click.echo(plan.explain())
        click.echo()


@main.command("timing-check")
@click.option("--config", "device", default="paper", show_default=True, help="device config")
@click.option("--samples", default=40, show_default=True)
@click.option("--seed", default=1, show_default=True)
def timing_check(device, samples, seed):
    """The device-timing table against direct runs of the cycle model on random shapes."""
    from .device_timing import check
    check(isa.load_config(device), samples, seed, out=click.echo)


if __name__ == "__main__":
    main()
