"""Synthesize controversial stimuli: ``python synthesize.py model_a=abs model_b=vgg``.

Sweeps: ``python synthesize.py -m experiment=exp1_mnist`` (all unordered pairs of the
experiment's models), or ``-m model_a=abs,kde model_b=vgg``. See docs/sweeps.md.
"""

from controversial.cli import command
from controversial.config import register_model_options
from controversial.synthesis.sweeps import register_pair_options
from controversial.tasks import synthesize

main = command("synthesize", synthesize.run, register=lambda: register_pair_options(register_model_options()))

if __name__ == "__main__":
    main()
