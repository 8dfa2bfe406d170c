"""The example's nodes declared as Dagster Components (one folder, one ``defs.yaml``, per node):
``dg list defs`` shows them with the Python-declared ones, ``dg scaffold defs
trident_assets.components.TransformNode <folder>`` adds one here."""
