from steps.common.step_cli import exit_process
from steps.train.step import main

exit_process(main())
