# Charts of a soak run (bench/soak.sh):
#   gnuplot -e "tsv='DIR/soak.tsv'; png='DIR/soak.png'; batch=32" tools/soak_plot.gp
# Four panels over elapsed minutes: resident memory (MiB) of every role, cache residency (mean
# occupied rows per trainer, with the capacity) and hit rate, throughput (iterations/s), and CPU
# milliseconds per iteration of every rank with the machine's load average.
if (!exists("tsv")) tsv = "soak.tsv"
if (!exists("png")) png = "soak.png"
if (!exists("batch")) batch = 32
set datafile separator "\t"
set datafile missing "NA"
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1000,1300 enhanced font ",10"
} else {
    set terminal png size 1000,1300
}
set output png
set multiplot layout 4,1
set grid
set key outside right
set xlabel "elapsed (minutes)"

set title "Resident memory per process (VmRSS)"
set ylabel "MiB"
set yrange [0:*]
plot tsv using ($1/60):($10/1024) skip 1 with lines lw 2 title "oracle", \
     ''  using ($1/60):($11/1024) skip 1 with lines lw 2 title "server 0", \
     ''  using ($1/60):($12/1024) skip 1 with lines lw 2 title "trainer 0", \
     ''  using ($1/60):($13/1024) skip 1 with lines lw 2 title "trainer 1", \
     ''  using ($1/60):($9/1024) skip 1 with lines lw 1 dt 2 title "mpirun", \
     ''  using ($1/60):($8/1024) skip 1 with lines lw 1 dt 3 title "launcher"

set title "Cache residency and hit rate"
set ylabel "rows per trainer"
set y2label "hit rate (%)"
set y2range [0:100]
set ytics nomirror
set y2tics
plot tsv using ($1/60):6 skip 1 with lines lw 2 title "mean resident rows", \
     ''  using ($1/60):7 skip 1 with lines lw 1 dt 2 title "capacity", \
     ''  using ($1/60):($5*100) skip 1 axes x1y2 with lines lw 2 title "hit rate"
unset y2label
unset y2tics
set ytics mirror

set title "Throughput"
set ylabel "iterations/s"
plot tsv using ($1/60):3 skip 1 with lines lw 1 title "iterations/s (sampling period)", \
     ''  using ($1/60):($4/batch) skip 1 with lines lw 1 dt 2 title "job's samples/s / batch"

set title "CPU time per iteration (flat unless the work per iteration grows) and machine load"
set ylabel "CPU ms per iteration"
set y2label "load average (1 min)"
set y2range [0:*]
set ytics nomirror
set y2tics
set datafile missing "NA"
plot tsv using ($1/60):15 skip 1 with linespoints pt 7 ps 0.4 lw 1 title "oracle", \
     ''  using ($1/60):16 skip 1 with linespoints pt 7 ps 0.4 lw 1 title "server 0", \
     ''  using ($1/60):17 skip 1 with linespoints pt 7 ps 0.4 lw 1 title "trainer 0", \
     ''  using ($1/60):18 skip 1 with linespoints pt 7 ps 0.4 lw 1 title "trainer 1", \
     ''  using ($1/60):14 skip 1 axes x1y2 with lines lw 1 dt 2 lc rgb "#888888" title "load (right)"
unset multiplot
