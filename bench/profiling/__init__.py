"""Instruments that say why a row of ``make bench`` reads what it does: where the CPU goes, timed
(:mod:`~bench.profiling.profile_drain`, :mod:`~bench.profiling.process_cpu`), and the instructions of each side
counted by callgrind, repeatable where timings are not (:mod:`~bench.profiling.callgrind_drain` for the
worker's drain, :mod:`~bench.profiling.callgrind_redis` for the server, :mod:`~bench.profiling.callgrind_enqueue`
for the door). Each is ``python -m bench.profiling.<name>``."""
