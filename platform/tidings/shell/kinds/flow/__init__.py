"""Stream stages that start one workflow per element: the in-process stage and the hosted one."""
