"""The code that runs inside an SGLang release environment.

Everything here is imported by an evaluation worker (``worker_main.py``) or a launched
server (``launch_main.py``) under the Python of a release environment, which has SGLang and
torch but not click or hypothesis. Rules (``tests/quality`` checks them):

* modules here import the standard library, SGLang, torch and each other, and nothing
  else of bisect-spec: the orchestrator talks to them through the wire protocol only
  (one JSON request per line on stdin, one JSON reply per line back: ``worker_main.py``);
* only modules here import ``sglang`` or ``torch``;
* ``worker_main.py`` and ``launch_main.py`` load this package without executing
  ``bisect_spec/__init__.py`` (whose imports need the orchestrator's dependencies).
"""
