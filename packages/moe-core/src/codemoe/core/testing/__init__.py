"""codemoe's conformance kit: checks every component of a kind must pass, for third-party plugins.

Turn on the fixtures in the root ``conftest.py`` (``pytest_plugins = ["codemoe.core.testing.plugin"]``),
then subclass a contract::

    from codemoe.core.testing import RouterContract

    class TestMyRouter(RouterContract):
        name = "my_router"

``docs/plugins.md`` has one worked example per component kind. The contracts of kinds whose data
types live in another package ship there: ``codemoe.rl.testing``, ``codemoe.evals.testing``.
"""

from codemoe.core.testing import contracts
from codemoe.core.testing.contracts import *  # noqa: F403  (the contracts module's __all__ is the kit's)

__all__ = contracts.__all__
