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
 *   layer 0 policy: policy/policy.c policy/policy_apply.c policy/policy_fields.c
 *                   policy/policy_json.c policy/policy_parse.c policy/policy_tree.c
 *   layer 1 loop:   loop/loop_decide.c loop/loop.c
 *   layer 2 replay: replay/replay_util.c replay/replay_simbk.c replay/replay_synth.c
 *                   replay/replay_report.c replay/replay_sim.c replay/replay_threads.c
 *                   replay/replay_verify.c
 */
#ifndef ADAPTALLOC_ADAPT_LAYERS_H
#define ADAPTALLOC_ADAPT_LAYERS_H
#endif
