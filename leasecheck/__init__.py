"""leasecheck: property-based and model-checked verification of lease-based job queues.

The product surface: the ``leasecheck`` command (``cli``), the pytest plugin
(``plugin``), the target loader (``targets``), settings profiles (``profiles``) and
the public mutant catalogue (``mutants``).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
