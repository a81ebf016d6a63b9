/*
 * The study timeline: browser and screen check, consent, instructions, practice trials, then the
 * participant's own trial order (stored on the server, so a reload resumes where they were), then
 * completion: only after the server confirms that every answer is stored does the page redirect
 * to Prolific. Nothing here knows which condition a stimulus belongs to: the server sends opaque ids
 * and an image for every trial, attention checks included.
 *
 * The server's session secret (token) is kept in this browser's localStorage and shown to the server
 * on every return, which is how a reload resumes. If any answer is refused, the page stops and says
 * so; it never goes on to the completion redirect.
 *
 * A study sized in degrees of visual angle (display_degrees in api/study) calibrates the screen with the
 * virtual chinrest before the practice: the server decides from its measurements whether the study can go on
 * (a failed calibration or a window too small for the stimuli ends it, with the reason shown) and the images
 * are drawn at degrees x pixels per degree CSS pixels.
 *
 * ?preview=1 is the researcher's walk-through: no Prolific id, an order from api/preview that is stored
 * nowhere, no answer sent, no redirect, and a banner on every page.
 */
(function () {
  "use strict";

  const MIN_WIDTH = 800;
  const MIN_HEIGHT = 600;
  const PREFETCH = 3;

  function showMessage(text, link) {
    const container = document.getElementById("study");
    const paragraph = document.createElement("p");
    paragraph.className = "status-message";
    paragraph.id = "status-message";
    paragraph.textContent = text;
    if (link) {
      paragraph.appendChild(document.createElement("br"));
      const anchor = document.createElement("a");
      anchor.href = link.href;
      anchor.textContent = link.text;
      paragraph.appendChild(anchor);
    }
    container.replaceChildren(paragraph);
  }

  function setTrouble(on) {
    document.getElementById("connection-banner").hidden = !on;
  }

  async function fetchText(path) {
    const reply = await fetch(path, { cache: "no-store" });
    if (!reply.ok) throw new Error(`could not load ${path}`);
    return reply.text();
  }

  function escapeHtml(text) {
    const holder = document.createElement("span");
    holder.textContent = text;
    return holder.innerHTML;
  }

  function tokenKey(pid) {
    return `controversial-study:${window.location.pathname}:${pid}`;
  }

  function storedToken(pid) {
    try {
      return window.localStorage.getItem(tokenKey(pid));
    } catch (error) {  // storage disabled: the server's SESSION_ID policy still lets the person resume
      return null;
    }
  }

  function storeToken(pid, token) {
    try {
      if (token) window.localStorage.setItem(tokenKey(pid), token);
      else window.localStorage.removeItem(tokenKey(pid));
    } catch (error) {
      // as above
    }
  }

  function prefetch(trials, from) {
    for (const trial of trials.slice(from, from + PREFETCH)) {
      if (trial.image_url) new Image().src = trial.image_url;
    }
  }

  function calibration(jsPsych, study, url, onSize) {
    // The blind spot is answered with the space bar, which jsPsych hears only while its container has the focus;
    // a click on the plugin's buttons (which it then removes) would leave the focus on the page: give it back.
    const refocus = () => setTimeout(() => jsPsych.getDisplayContainerElement().focus(), 0);
    // Our own prompts: the plugin's defaults carry style attributes, which the Content-Security-Policy blocks.
    const chinrest = {
      type: jsPsychVirtualChinrest,
      resize_units: "none",
      blindspot_reps: 5,
      item_path: null,
      adjustment_prompt: "<div class='calibration-text'><p>Hold a credit card (or any card of that size: a bank, "
        + "membership or ID card) flat against the screen, and drag the lower right corner of the grey box until "
        + "the box has exactly the size of the card.</p></div>",
      adjustment_button_prompt: "The box has the size of the card",
      blindspot_prompt: "<div class='calibration-text'><p>Now we measure how far you sit from the screen.</p><ol>"
        + "<li>Put your left hand on the <b>space bar</b>.</li><li>Cover your right eye with your right hand.</li>"
        + "<li>With your left eye, look at the black square and keep looking at it.</li><li>The red ball moves "
        + "to the left; press the space bar as soon as it disappears.</li></ol>"
        + "<p>Press the space bar when you are ready.</p></div>",
      viewing_distance_report: "<p>You sit about <span id='distance-estimate'></span> from the screen. "
        + "Does that seem about right?</p>",
      redo_measurement_button_label: "No, measure again",
      blindspot_done_prompt: "Yes",
      data: { screen: "calibration" },
      on_load: () => jsPsych.getDisplayContainerElement().addEventListener("click", refocus),
      on_finish: () => jsPsych.getDisplayContainerElement().removeEventListener("click", refocus),
    };
    const decide = {
      type: jsPsychCallFunction,
      async: true,
      func: (done) => {
        const measured = jsPsych.data.get().filter({ screen: "calibration" }).last(1).values()[0];
        const body = {
          px_per_degree: measured.px2deg,
          viewing_distance_mm: measured.view_dist_mm,
          window_width: window.innerWidth,
          window_height: window.innerHeight,
        };
        StudyApi.persistent("POST", url, body, setTrouble)
          .then((decision) => {
            if (decision.status !== "ok") {
              jsPsych.abortExperiment(`<p class='status-message'>${escapeHtml(decision.message)}</p>`);
              return;
            }
            onSize(decision.stimulus_px);
            done(decision);
          })
          .catch((error) => jsPsych.abortExperiment(`<p class='status-message'>${escapeHtml(error.message)}</p>`));
      },
    };
    const intro = {
      type: jsPsychHtmlButtonResponse,
      stimulus: "<div class='text-page'><p>The images of this study have to be shown at a known size on your "
        + "screen. The next two short steps measure your screen and how far you sit from it: you need a card the "
        + `size of a credit card. Please sit as you will sit during the study.</p></div>`,
      choices: ["Measure my screen"],
    };
    return [intro, chinrest, decide];
  }

  async function main() {
    const params = new URLSearchParams(window.location.search);
    const preview = params.get("preview") === "1";
    if (preview) document.getElementById("preview-banner").hidden = false;
    const arrival = {
      prolific_pid: params.get("PROLIFIC_PID") || "",
      study_id: params.get("STUDY_ID") || "",
      session_id: params.get("SESSION_ID") || "",
      token: storedToken(params.get("PROLIFIC_PID") || ""),
    };
    if (!arrival.prolific_pid && !preview) {
      showMessage("This study has to be opened from its link on Prolific (the link carries your Prolific ID).");
      return;
    }
    let study, state, consentHtml, instructionsHtml;
    try {
      [study, state, consentHtml, instructionsHtml] = await Promise.all([
        StudyApi.request("GET", "api/study"),
        preview ? StudyApi.request("GET", "api/preview") : StudyApi.request("POST", "api/session", arrival),
        fetchText("static/text/consent.html"),
        fetchText("static/text/instructions.html"),
      ]);
    } catch (error) {
      // A refusal (4xx: e.g. this Prolific ID is being taken in another browser) does not pass with time, so
      // only a failure of the server or the network asks for a reload.
      showMessage(error.status >= 400 && error.status < 500
        ? `The study could not start: ${error.message}.`
        : `The study could not start: ${error.message}. Please reload the page in a minute.`);
      return;
    }
    if (state.status === "screened_out") {
      showMessage(state.message);
      return;
    }
    if (state.status === "completed") {
      storeToken(arrival.prolific_pid, null);
      showMessage(state.message, { href: state.redirect_url, text: "Return to Prolific" });
      return;
    }

    const token = state.token;
    if (!preview) storeToken(arrival.prolific_pid, token);
    document.getElementById("study").replaceChildren();  // drop "Loading..." before jsPsych takes over
    const jsPsych = initJsPsych({ display_element: "study" });
    let rejected = null;
    const answers = preview ? { push: () => {}, drained: async () => {} }  // a preview sends no answer
      : new StudyApi.AnswerQueue(token, setTrouble, (answer, error) => {
      if (rejected) return;  // the first refusal already stopped the study
      rejected = error.status === 404
        ? "this study was continued in another browser or window; please continue it there"
        : `your answer to image ${answer.position} was not accepted (${error.message})`;
      jsPsych.abortExperiment(`<p class='status-message'>The study stopped: ${escapeHtml(rejected)}. `
        + "Your other answers are saved. Please do not submit on Prolific; contact the researcher through "
        + "Prolific instead.</p>");
    });
    // In degrees: the size the calibration gives (dynamic, read when each trial starts); else the plugin's default.
    let stimulusSize = null;
    const rating = { type: jsPsychRateCategories, categories: study.categories, levels: study.rating_levels };
    if (study.display_degrees) {
      if (state.px_per_degree) stimulusSize = study.display_degrees * state.px_per_degree;  // calibrated before
      rating.image_size = () => stimulusSize;
    }
    const calibrate = study.display_degrees && !state.px_per_degree
      ? calibration(jsPsych, study, preview ? "api/preview/calibration" : `api/sessions/${token}/calibration`,
        (size) => { stimulusSize = size; })
      : [];
    const timeline = [];

    timeline.push({
      type: jsPsychBrowserCheck,
      minimum_width: MIN_WIDTH,
      minimum_height: MIN_HEIGHT,
      skip_features: ["webaudio", "webcam", "microphone", "vsync_rate"],
      inclusion_function: (data) => !data.mobile,
      exclusion_message: () => "<p>This study needs a computer (not a phone or tablet) with a window of at least "
        + `${MIN_WIDTH} x ${MIN_HEIGHT} pixels. Please return the study on Prolific.</p>`,
    });

    if (!state.consented) {
      timeline.push({
        type: jsPsychHtmlButtonResponse,
        stimulus: consentHtml,
        choices: ["I agree", "I do not agree"],
        data: { screen: "consent" },
        on_finish: (data) => {
          if (data.response !== 0) {
            jsPsych.abortExperiment("<p class='status-message'>You did not consent, so the study ends here. "
              + "Please return the study on Prolific. Thank you for your interest.</p>");
          }
        },
      });
      timeline.push({
        type: jsPsychCallFunction,
        async: true,
        func: (done) => {
          const check = jsPsych.data.get().filter({ trial_type: "browser-check" }).values()[0] || {};
          const browser = {};
          for (const name of ["browser", "browser_version", "os", "mobile", "width", "height", "fullscreen"]) {
            if (name in check) browser[name] = check[name];
          }
          browser.screen_width = window.screen.width;
          browser.screen_height = window.screen.height;
          browser.device_pixel_ratio = window.devicePixelRatio;
          if (preview) {
            done(true);
            return;
          }
          StudyApi.persistent("POST", `api/sessions/${token}/consent`, { consent: true, browser }, setTrouble)
            .then(() => done(true))
            .catch((error) => jsPsych.abortExperiment(`<p class='status-message'>${escapeHtml(error.message)}</p>`));
        },
      });
    }

    if (state.n_done === 0) {
      // One page with one button: html-button-response, whose markup has no style="" attribute (jsPsych's
      // instructions plugin writes three, which the server's Content-Security-Policy blocks).
      timeline.push({ type: jsPsychHtmlButtonResponse, stimulus: instructionsHtml, choices: ["Start practice"],
                      data: { screen: "instructions" } });
      timeline.push(...calibrate);
      if (study.demo_trials.length) {
        // The preload plugin's progress bar is two style="" attributes, blocked likewise: a message instead.
        timeline.push({ type: jsPsychPreload, images: study.demo_trials.map((t) => t.image_url),
                        show_progress_bar: false,
                        message: "<p class='status-message'>Loading the practice images&hellip;</p>" });
      }
      study.demo_trials.forEach((demo, index) => {
        timeline.push({ ...rating, image: demo.image_url,
                        header: `Practice image ${index + 1} of ${study.demo_trials.length}`,
                        data: { screen: "demo" } });
      });
      timeline.push({
        type: jsPsychHtmlButtonResponse,
        stimulus: "<div class='text-page'><p>Practice is over. The study starts now; it works exactly the same way.</p></div>",
        choices: ["Start the study"],
      });
    } else {
      timeline.push({
        type: jsPsychHtmlButtonResponse,
        stimulus: `<div class='text-page'><p>Welcome back. You have already rated ${state.n_done} of `
          + `${state.n_total} images; you will continue where you left off.</p></div>`,
        choices: ["Continue"],
      });
      timeline.push(...calibrate);  // resumed before the calibration was stored
    }

    state.trials.forEach((trial, index) => {
      timeline.push({
        ...rating,
        image: trial.image_url,
        header: `Image ${state.n_done + index + 1} of ${state.n_total}`,
        data: { screen: "trial", position: trial.position },
        on_start: () => prefetch(state.trials, index + 1),
        on_finish: (data) => answers.push({
          position: trial.position,
          stimulus_id: trial.stimulus_id,
          ratings: data.ratings,
          rt_ms: data.rt,
          first_reaction_rt_ms: data.first_reaction_rt,
        }),
      });
    });

    let redirectUrl = null;
    timeline.push({
      type: jsPsychCallFunction,
      async: true,
      func: (done) => {
        showMessage("Saving your answers, please keep this page open\u2026");
        answers.drained()
          .then(() => {
            if (rejected) throw new Error(rejected);  // never complete after a refused answer
            if (preview) return { redirect_url: state.redirect_url };
            return StudyApi.persistent("POST", `api/sessions/${token}/complete`, undefined, setTrouble);
          })
          .then((reply) => {
            redirectUrl = reply.redirect_url;
            if (!preview) storeToken(arrival.prolific_pid, null);
            done(true);
          })
          .catch((error) => {
            jsPsych.abortExperiment("<p class='status-message'>Your answers could not all be saved: "
              + `${escapeHtml(error.message)}. Please reload this page to answer the missing images.</p>`);
          });
      },
    });

    await jsPsych.run(timeline);
    if (preview && redirectUrl) {
      showMessage("Preview finished: nothing was stored. A participant would now be sent back to Prolific:",
                  { href: redirectUrl, text: redirectUrl });
      return;
    }
    if (redirectUrl && !rejected) {
      showMessage("All your answers are saved. Thank you! Taking you back to Prolific\u2026",
                  { href: redirectUrl, text: "Click here if nothing happens" });
      window.location.assign(redirectUrl);
    }
  }

  main();
})();
