"""The properties themselves, as pytest tests marked ``@pytest.mark.leasecheck(name)``.

``leasecheck check`` runs this folder through pytest; so does ``pytest`` in the
repository. Each module checks one property family against the target fixtures of
``leasecheck.plugin``.
"""
