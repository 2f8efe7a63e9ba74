"""Entry point: ``python -m sandbox.engines -- COMMAND ARGS...`` (see ``launch``)."""

import sys

from sandbox.engines.launch import main

sys.exit(main())
