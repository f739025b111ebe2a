"""The quorum simulation's pytest setup: with PYKRAFT_RAFT_MUTANT=<name> in the environment,
every simulated node of the run is built with that deliberately broken rule
(tests/sim/raft_mutants.py), to check that the simulation catches it. Such a run keeps the
CI profile (derandomized, the same examples) but does not shrink a failure: the question
is only whether the mutant is caught."""

from __future__ import annotations

import os

from hypothesis import Phase, settings

from tests.sim.raft_mutants import ENV, install

if os.environ.get(ENV):
    install(os.environ[ENV])
    settings.register_profile(
        "ci-mutant", settings.get_profile("ci"), phases=[p for p in Phase if p is not Phase.shrink]
    )
    settings.load_profile("ci-mutant")
