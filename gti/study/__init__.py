"""The learning-curve study: per (arm, seed) runs whose small outputs are committed
(:mod:`gti.study.run`), assembled into tables and plots from those files alone
(:mod:`gti.study.assemble`)."""
