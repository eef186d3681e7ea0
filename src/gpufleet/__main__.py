"""`python -m gpufleet`: the same command line as the `gpufleet` script."""

from gpufleet.cli.main import app

app(prog_name="gpufleet")
