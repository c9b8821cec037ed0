"""One folder per kind. Each holds its declaration and handle (``handle.py``), its agent
(``agent.py``) and its store; its decisions live in ``tidings.core``.

A kind imports another only along a declared edge: saga -> aggregate; schedule ->
aggregate and workflow; projection and flow -> workflow.
"""
