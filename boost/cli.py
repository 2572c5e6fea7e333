"""`python -m boost.cli`: `plora boost` (serving/cli.py) under the name the Makefile's `make
boost` and docs/boost.md use: the same options, output and errors."""
import sys


def main(args: list[str] | None = None) -> None:
    """Run `plora boost` with `args` (default: the command line's)."""
    from serving.cli import main as plora
    plora(["boost", *(sys.argv[1:] if args is None else args)], prog_name="plora")


if __name__ == "__main__":
    main()
