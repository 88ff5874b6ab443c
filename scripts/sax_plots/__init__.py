"""The figures of sax's results (scripts/plots.py is the command line): one module per kind of
figure, and `common` for reading input, writing files and the colours every figure shares."""
