# Mixtral-8x7B on one 8xH100 server: MoE tensor-parallel vs expert-parallel vs hybrid vs attention-DP.
# Data: moesim serve --scenario examples/serve-mixtral-tp-ep-hybrid.json --sweep-out mixtral-tp-ep-hybrid.csv
# Draw: cd examples/plots && gnuplot mixtral-tp-ep-hybrid.gp   (writes mixtral-tp-ep-hybrid.svg)
# Rows: 2 routing skews x 4 plans x 4 user counts, in that order (the sweep's keys sorted by name).
set datafile separator ','
set terminal svg size 1100,440 dynamic font 'sans,11'
set output 'mixtral-tp-ep-hybrid.svg'
set multiplot layout 1,2 title 'Mixtral-8x7B, 8xH100, bf16, 128 in / 512 out (moesim serve)'
set logscale x 2
set xrange [0.8:320]
set xlabel 'concurrent sequences (closed-loop users)'
set ylabel 'decode speed per user, tokens/s (1 / mean TPOT)'
set yrange [0:*]
set key bottom left
set grid
plans = 'TP(moe\_tp=8) hybrid(moe\_tp=2,moe\_ep=4) EP(moe\_ep=8) attention-DP+EP'
do for [z=0:1] {
  set title (z == 0 ? 'uniform routing' : 'skewed routing (Zipf s = 1.2)')
  plot for [p=0:3] 'mixtral-tp-ep-hybrid.csv' skip 1 every ::((z*4+p)*4)::((z*4+p)*4+3) \
       using 4:7 with linespoints lw 2 pt (p+5) title word(plans, p+1)
}
unset multiplot
