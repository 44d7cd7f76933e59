from steps.common.step_cli import exit_process
from steps.optimize.step import main

exit_process(main())
