"""Commands' tasks: each takes its typed settings (controversial.settings) and an Invocation; none touches Hydra."""
