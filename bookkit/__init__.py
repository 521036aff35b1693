"""What builds and checks the book, apart from what its readers import (``companion_lib``).

Not part of the wheel, and not in the companion library's fingerprint: editing a file here re-executes no
notebook and invalidates no disk cache. One module per job:

* :mod:`bookkit.execution` -- the execution cache: notebooks executed once by ``make test`` serve the website;
* :mod:`bookkit.colab` -- the Colab setup cell and the paired ``.ipynb`` copies;
* :mod:`bookkit.student` -- the student edition and the nbgrader course;
* :mod:`bookkit.claims` -- reading a claims table from a rendered page or an executed notebook;
* :mod:`bookkit.sitecheck` -- the built website checked as a reader would;
* :mod:`bookkit.reseed` -- a chapter's claims under other seeds (papermill);
* :mod:`bookkit.prose` -- numbers typed into prose;
* :mod:`bookkit.bookpages` -- the Sphinx extension (scoreboard, run times, part pages, conventions);
* :mod:`bookkit.pytest_notebooks` and :mod:`bookkit.pytest_executed` -- the pytest plugins that run the
  chapter notebooks under nbval, report their cost and keep them as executed.

``python -m bookkit <command>`` runs the commands the Makefile calls (:mod:`bookkit.__main__`).
"""
