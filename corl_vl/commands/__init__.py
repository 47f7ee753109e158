"""CLI subcommands, one module each.

Every module here defines ``register(subparsers)`` which adds its parser and sets ``func`` (a callable taking
the parsed ``argparse.Namespace`` and returning an exit code). :mod:`corl_vl.cli` discovers them, so adding a
command never means editing a central list.
"""
