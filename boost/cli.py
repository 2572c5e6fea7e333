"""`python -m boost.cli`: BOOST's reproduction table and its use in PLoRA's pool (make boost)."""
import click


@click.command()
@click.option("--requests", default=2000, show_default=True, help="requests of the DSR churn run (Fig. 19)")
@click.option("--pool-requests", default=128, show_default=True, help="requests per serving run of the pool table")
@click.option("--instances", default=300, show_default=True, help="BAPP-R add-kernel instances (7 full waves each)")
def main(requests, pool_requests, instances):
    """Print the claims of seed 002 beside the model's, the decode-step and churn details, the
    pool comparison, and the summary line."""
    from .reproduce import reproduce
    reproduce(echo=click.echo, requests=requests, pool_requests=pool_requests, instances=instances)


if __name__ == "__main__":
    main()
