"""The former name of :mod:`corl_vl.data.dataset_recipes` (the named training datasets), kept so that imports
of ``corl_vl.data.recipes`` keep working; new code imports ``corl_vl.data.dataset_recipes``."""

from corl_vl.data.dataset_recipes import (
    RECIPES,
    Recipe,
    get_recipe,
    load_recipe_rows,
    pair_data_defaults,
    prepare,
    split_recipe_name,
)

__all__ = [
    "RECIPES",
    "Recipe",
    "get_recipe",
    "load_recipe_rows",
    "pair_data_defaults",
    "prepare",
    "split_recipe_name",
]
