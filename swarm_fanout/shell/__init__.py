"""Shell: everything that touches processes, sockets and the run's files (run dirs, launch and
drives, the daemon client, process hygiene, the recording proxy, the live observer, the agent's
config, run sets and regrading).
"""
