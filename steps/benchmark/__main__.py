from steps.benchmark.step import main
from steps.common.step_cli import exit_process

exit_process(main())
