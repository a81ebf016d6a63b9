"""Synthesize controversial stimuli: ``python synthesize.py model_a=abs model_b=vgg``.

Sweeps: ``python synthesize.py -m experiment=exp1_mnist`` (all unordered pairs of the
experiment's models), or ``-m model_a=abs,kde model_b=vgg``. See docs/sweeps.md.
"""

from controversial.cli import command
from controversial.tasks import synthesize

main = command("synthesize", synthesize.run)

if __name__ == "__main__":
    main()
