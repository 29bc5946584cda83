/*
 * layers.h — adapt's floors (no code: tools/check-layers.sh reads this list
 * and the object files of aa_policy, aa_loop and aa_replay, for the ctest
 * test_layers_adapt). The three sub-modules each see only the public headers
 * of those below them (adapt/CMakeLists.txt); this list also holds their
 * files to it: the policy model at the bottom, the loop above it (it proves
 * a change through the verifier it is handed, never by calling the
 * simulator), the simulator and the loop's verifier on top.
 *
 * Layers, bottom first: a file uses what its own layer and the layers below
 * define, never what a higher layer defines:
 *   layer 0 model:  policy/policy_defaults.c policy/policy_fields.c
 *   layer 1 parse:  policy/policy_tree.c policy/policy_parse.c policy/policy_json.c
 *   layer 2 policy: policy/policy.c
 *   layer 3 apply:  policy/policy_apply.c
 *   layer 4 decide: loop/loop_decide.c
 *   layer 5 loop:   loop/loop.c
 *   layer 6 sim:    replay/replay_util.c replay/replay_simbk.c replay/replay_synth.c
 *                   replay/replay_report.c
 *   layer 7 replay: replay/replay_sim.c replay/replay_threads.c replay/replay_verify.c
 *
 * (The simulator and the verifier share a floor: a simulation run with the
 * loop (--adapt) hands the loop this verifier, which runs simulations.)
 */
#ifndef ADAPTALLOC_ADAPT_LAYERS_H
#define ADAPTALLOC_ADAPT_LAYERS_H
#endif
