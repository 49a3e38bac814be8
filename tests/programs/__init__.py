"""PyTorch programs in the shapes learners port (minGPT, the Annotated Transformer).

Each file is written for PyTorch; the tests run it twice, as written and with only its import
lines changed to tinyattn, and compare the two at the same weights.
"""
