import sys

from corl_vl.cli import main

sys.exit(main())
