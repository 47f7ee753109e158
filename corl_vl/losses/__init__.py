"""The loss menu by name: advantages, aggregations and KL estimators (:mod:`.objectives`), policy losses
(:mod:`.policy_losses`) and rollout ↔ trainer corrections (:mod:`.rollout_correction`).

Why a package below ``corl_vl.config`` and ``corl_vl.train``: the config checks validate ``grpo.*`` names against
these tables before torch is imported, and :mod:`corl_vl.train.grpo` calls the entries; so both read them from
here and neither reaches into the other. The modules import neither torch nor any corl-vl module. A new loss,
advantage or correction is one function and one table row in one of them.
"""
