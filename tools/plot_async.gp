# Convergence chart of bench/bench_async.sh:
#   gnuplot -e "dir='DIR'; out='FILE.png'; runs='sync bagpipe async-S1'" tools/plot_async.gp
# For each run R in `runs`: DIR/R.train holds "samples loss" (the training windows' mean loss)
# and DIR/R.eval "samples logloss auc" (validation).  Three panels against samples seen:
# training loss, validation logloss, validation AUC.  bagpipe (sync's model bit for bit) is drawn
# as large open points on a dashed line; list it last so that it is drawn over the run it equals.  PNG (pngcairo, else png) or SVG.
if (!exists("dir")) dir = "."
if (!exists("out")) out = dir."/async_convergence.png"
if (!exists("runs")) runs = "sync"
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1500,480 enhanced font ",11"
} else {
    if (strstrt(GPVAL_TERMINALS, " png ") > 0) {
        set terminal png size 1500,480
    } else {
        set terminal svg size 1500,480 dynamic
    }
}
set output out
# The project's palette (tools/plot_cachesim.gp): sync grey-black, bagpipe orange, async runs in
# purple-to-green as the bound grows.
colour(r) = r eq "sync" ? "#333333" : r eq "bagpipe" ? "#d95f02" : \
            strstrt(r, "S100") ? "#1b9e77" : strstrt(r, "S8") ? "#7570b3" : strstrt(r, "S1") ? "#e7298a" : "#66a61e"
dash(r) = r eq "bagpipe" ? 2 : 1
ptype(r) = r eq "bagpipe" ? 6 : 7
psize(r) = r eq "bagpipe" ? 2.5 : 0.8
set grid
set key top right box opaque
set xlabel "samples"
set format x "%.0s%c"
set multiplot layout 1,3 title "sync vs async (bounded staleness S) vs bagpipe (sync's model bit for bit): same data, model, seed"
set title "training loss (window mean)"
set ylabel "logloss"
plot for [r in runs] dir."/".r.".train" using 1:2 with lines lw 2 dt dash(r) lc rgb colour(r) title r
set title "validation logloss"
set ylabel "logloss"
plot for [r in runs] dir."/".r.".eval" using 1:2 with linespoints pt ptype(r) ps psize(r) lw 2 dt dash(r) lc rgb colour(r) title r
set title "validation AUC"
set ylabel "AUC"
set key bottom right box opaque
plot for [r in runs] dir."/".r.".eval" using 1:3 with linespoints pt ptype(r) ps psize(r) lw 2 dt dash(r) lc rgb colour(r) title r
unset multiplot
unset output
