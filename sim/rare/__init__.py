"""Rare-event estimation, a wing of its own: the tilted draw bank, weighted tallies, the
cross-entropy loop of `tailsim nines`, its files and figure, and the judging of `tailsim tune`'s
finalists against an SLO plain runs cannot resolve. It runs the study layer's policy runs on a
tilted bank, so it sits above study and output; nothing below imports it. It may import every
layer below it."""
