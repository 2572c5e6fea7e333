"""BOOST's command (boost/): boost, as `make boost` runs it."""
import click

from .app import main


@main.command()
@click.option("--requests", default=2000, show_default=True, type=click.IntRange(min=1),
              help="requests of the DSR churn run (Fig. 19)")
@click.option("--pool-requests", default=128, show_default=True, type=click.IntRange(min=1),
              help="requests per serving run of the pool table")
@click.option("--instances", default=300, show_default=True, type=click.IntRange(min=1),
              help="BAPP-R add-kernel instances (7 full waves each)")
def boost(requests: int, pool_requests: int, instances: int) -> None:
    """BOOST (seed 002, docs/boost.md): the paper's claims beside the model's, the decode-step
    and churn details, BOOST in PLoRA's pool beside PLoRA alone, and the summary line
    (make boost)."""
    from boost.reproduce import reproduce as run_boost
    run_boost(echo=click.echo, requests=requests, pool_requests=pool_requests, instances=instances)
