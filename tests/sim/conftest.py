"""The quorum simulation's pytest setup: with PYKRAFT_RAFT_MUTANT=<name> in the environment,
every simulated node of the run is built with that deliberately broken rule
(tests/sim/raft_mutants.py), to check that the simulation catches it."""

from __future__ import annotations

import os

from tests.sim.raft_mutants import ENV, install

if os.environ.get(ENV):
    install(os.environ[ENV])
