"""Front ends: turn a framework's model into a :class:`~remat.graph.DFGraph`.

``remat.frontends.torch.extract`` handles PyTorch (``torch.fx`` tracing). Import
the submodule you need; this package imports no framework itself, so the Keras
front end does not pull in torch and vice versa.
"""
