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

  async function main() {
    const params = new URLSearchParams(window.location.search);
    const arrival = {
      prolific_pid: params.get("PROLIFIC_PID") || "",
      study_id: params.get("STUDY_ID") || "",
      session_id: params.get("SESSION_ID") || "",
      token: storedToken(params.get("PROLIFIC_PID") || ""),
    };
    if (!arrival.prolific_pid) {
      showMessage("This study has to be opened from its link on Prolific (the link carries your Prolific ID).");
      return;
    }
    let study, state, consentHtml, instructionsHtml;
    try {
      [study, state, consentHtml, instructionsHtml] = await Promise.all([
        StudyApi.request("GET", "api/study"),
        StudyApi.request("POST", "api/session", arrival),
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
    if (state.status === "completed") {
      storeToken(arrival.prolific_pid, null);
      showMessage(state.message, { href: state.redirect_url, text: "Return to Prolific" });
      return;
    }

    const token = state.token;
    storeToken(arrival.prolific_pid, token);
    document.getElementById("study").replaceChildren();  // drop "Loading..." before jsPsych takes over
    const jsPsych = initJsPsych({ display_element: "study" });
    let rejected = null;
    const answers = new StudyApi.AnswerQueue(token, setTrouble, (answer, error) => {
      if (rejected) return;  // the first refusal already stopped the study
      rejected = error.status === 404
        ? "this study was continued in another browser or window; please continue it there"
        : `your answer to image ${answer.position} was not accepted (${error.message})`;
      jsPsych.abortExperiment(`<p class='status-message'>The study stopped: ${escapeHtml(rejected)}. `
        + "Your other answers are saved. Please do not submit on Prolific; contact the researcher through "
        + "Prolific instead.</p>");
    });
    const rating = { type: jsPsychRateCategories, categories: study.categories, levels: study.rating_levels };
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
            return StudyApi.persistent("POST", `api/sessions/${token}/complete`, undefined, setTrouble);
          })
          .then((reply) => {
            redirectUrl = reply.redirect_url;
            storeToken(arrival.prolific_pid, null);
            done(true);
          })
          .catch((error) => {
            jsPsych.abortExperiment("<p class='status-message'>Your answers could not all be saved: "
              + `${escapeHtml(error.message)}. Please reload this page to answer the missing images.</p>`);
          });
      },
    });

    await jsPsych.run(timeline);
    if (redirectUrl && !rejected) {
      showMessage("All your answers are saved. Thank you! Taking you back to Prolific\u2026",
                  { href: redirectUrl, text: "Click here if nothing happens" });
      window.location.assign(redirectUrl);
    }
  }

  main();
})();
