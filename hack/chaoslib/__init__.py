"""The chaos campaign behind ``hack/chaos.py``: a seeded schedule (``plan``), the processes (``procs``), what the
run saw (``observe``), the invariants (``checks``) and one run (``run``)."""
