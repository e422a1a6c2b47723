"""``python -m elastic_compile.entrypoint``: the same as the ``elastic-launch`` console script."""

from elastic_compile.entrypoint.cli import run

# The guard matters: under spawn/forkserver, multiprocessing re-imports the main module in
# every worker as __mp_main__; unguarded, each worker would launch again
# (https://docs.python.org/3/library/multiprocessing.html#the-spawn-and-forkserver-start-methods).
if __name__ == "__main__":
    run()
