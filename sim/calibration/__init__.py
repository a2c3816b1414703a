"""Calibration, a wing of its own: call logs read (CSV, Parquet, OTLP), fitted by maximum
likelihood (first token, speed, stalls, rates, lengths, and the extras: spells, difficulty,
load, overhead, arrivals), reported, drawn, checked by a run, and synthesized back from a
scenario (`tailsim fit`, `tailsim synth`). It reads and writes files, so it sits above the
output layer; nothing below imports it. It may import every layer below it."""
