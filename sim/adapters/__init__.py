"""Adapters for foreign formats, a wing of its own: another tool's configuration turned into
scenario data (`tailsim import litellm`), and scenarios turned into theirs. They speak the
scenario format and nothing below imports them. It may import every layer below it (it needs
only `sim.model`)."""
