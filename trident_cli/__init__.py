"""The ``trident`` console script. It sits above the three packages (it may import all of them)."""
